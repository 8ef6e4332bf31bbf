"""Connected components of a graph as Beam transforms, in a stated number of rounds.

The groups of duplicates are the connected components of the confirmed pairs
(`duplicates`); on Beam's workers the pairs are a PCollection, and nothing of them may
gather on the driver. This is the large-star / small-star algorithm (Kiveris et al.,
"Connected Components in MapReduce and Beyond", SoCC 2014), as BigCode's near-duplicate
pipeline runs it on Spark:

* large-star: each node u links every neighbour v > u to the least of u and its
  neighbours;
* small-star: each node u links itself and every neighbour v < u to the least of those.

Both keep the components and shrink each node's distance to its component's least node;
alternated, they reach a forest of stars (each node linked to its component's least) in
O(log^2 n) rounds. A Beam pipeline is a fixed graph, so the rounds are unrolled: `rounds`
pairs of the two, each followed by a count of the links it changed (a Beam counter,
`changed_large_<k>`, `changed_small_<k>`); `check_converged` raises when the last round
still changed something: the result is then not the components, and saying so is the
only honest answer. Nodes are any totally ordered, picklable values (ints, strings); every
node is in the output with the least node of its component, itself for the least.
"""

import apache_beam as beam

NAMESPACE = "imagesets.components"
# Pairs of large-star and small-star. Measured (tests/analysis/test_beam_components.py):
# chains up to 20 long, shuffled, a star, a clique and random graphs settle in 4; a
# shuffled chain of 2,000 nodes in 9.
ROUNDS = 12


class NotConverged(RuntimeError):
  pass


def _large_star(node_neighbours):
  node, neighbours = node_neighbours
  least = min(min(neighbours), node)
  for neighbour in neighbours:
    if neighbour > node:
      yield neighbour, least


def _small_star(node_neighbours):
  node, neighbours = node_neighbours
  lower = [v for v in neighbours if v < node]
  least = min(lower, default=node)
  for v in (*lower, node):
    if v != least:
      yield v, least


def _both_ways(edge):
  a, b = edge
  yield a, b
  yield b, a


def _changed(keyed, counter):
  """Counts the links in exactly one of the two sets (before, after)."""
  _, (before, after) = keyed
  if bool(before) != bool(after):
    counter.inc()


class _Round(beam.PTransform):
  """One large-star or small-star step over links (u, v); links out, with a counter of
  the links that differ from the links in."""

  def __init__(self, step, name: str):
    super().__init__()
    self._step, self._name = step, name

  def expand(self, links):
    counter = beam.metrics.Metrics.counter(NAMESPACE, f"changed_{self._name}")
    # (large-star reads each node's neighbours both ways; small-star too)
    out = (links
           | "Both ways" >> beam.FlatMap(_both_ways)
           | "Neighbours" >> beam.GroupByKey()
           | "Step" >> beam.FlatMap(self._step)
           | "Distinct" >> beam.Distinct())
    keyed = lambda label, pcoll: pcoll | label >> beam.Map(lambda link: (link, None))
    _ = ({"before": keyed("Key in", links), "after": keyed("Key out", out)}
         | "Compare" >> beam.CoGroupByKey()
         | "Count" >> beam.Map(lambda kv: _changed((kv[0], (kv[1]["before"], kv[1]["after"])),
                                                   counter)))
    return out


class Components(beam.PTransform):
  """Edges (a, b) in; (node, least node of its component) out, for every node of an
  edge. `rounds` pairs of large-star and small-star; the counters
  `changed_large_<k>` / `changed_small_<k>` say what each changed."""

  def __init__(self, rounds: int = ROUNDS):
    super().__init__()
    self._rounds = rounds

  def expand(self, edges):
    links = (edges
             | "Drop loops" >> beam.Filter(lambda edge: edge[0] != edge[1])
             | "Ordered" >> beam.Map(lambda edge: (max(edge), min(edge)))
             | "Distinct edges" >> beam.Distinct())
    nodes = (edges
             | "Nodes" >> beam.FlatMap(lambda edge: edge)
             | "Distinct nodes" >> beam.Distinct())
    for number in range(self._rounds):
      links = links | f"Large {number}" >> _Round(_large_star, f"large_{number}")
      links = links | f"Small {number}" >> _Round(_small_star, f"small_{number}")
    # (at the end each node but its component's least has one link, to that least)
    return ({"least": links, "node": nodes | "Keyed" >> beam.Map(lambda n: (n, None))}
            | "Join" >> beam.CoGroupByKey()
            | "Each node" >> beam.Map(lambda kv: (kv[0], min(kv[1]["least"], default=kv[0]))))


def check_converged(result: beam.runners.runner.PipelineResult, rounds: int = ROUNDS) -> dict:
  """{counter name: links changed} of a finished pipeline's `Components`; NotConverged
  when its last round changed a link."""
  query = result.metrics().query(beam.metrics.MetricsFilter().with_namespace(NAMESPACE))
  changed = {c.key.metric.name: c.committed for c in query["counters"]}
  last = [changed.get(f"changed_large_{rounds - 1}", 0),
          changed.get(f"changed_small_{rounds - 1}", 0)]
  if any(last):
    raise NotConverged(f"connected components: the last of {rounds} rounds still changed "
                       f"{sum(last)} link(s): the groups are not final; run with more rounds")
  return changed
