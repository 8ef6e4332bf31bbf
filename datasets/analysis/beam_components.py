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
`changed_large_<k>`, `changed_small_<k>`, counted for every link so that a round without
changes reports 0, not nothing); `check_converged` raises when the last round still
changed something (the result is then not the components, and saying so is the only
honest answer), and when the pipeline is not done or its runner did not report that
count. Both steps leave a star forest as it is, and only a star forest (a review
checked every link set on up to 6 nodes). A node's neighbours are gathered on one
worker (`GroupByKey`): a node with most of the edges is a skew the grouping before this
must avoid. Nodes are any totally ordered, picklable values (ints, strings); every
node is in the output with the least node of its component, itself for the least.
"""

import collections
import math

import apache_beam as beam

NAMESPACE = "imagesets.components"
# Pairs of large-star and small-star (O(log^2 n) suffice). Measured: the test graphs
# (chains up to 20 long, shuffled, a star, a clique, random graphs) settle in 4; shuffled
# chains of 2,000 nodes in 9, of 20,000 in 11-12, of 200,000 in 15 (a review's simulation
# with these steps). Every round costs its shuffles even after the graph settles.
ROUNDS = 20


def rounds_for(nodes: int) -> int:
  """The rounds stated for a graph of at most `nodes` nodes: 4 more than log2(nodes), at
  least 8, at most ROUNDS (shuffled chains, the slowest graphs measured, settle in about
  log2(nodes) - 2 rounds), so that a small graph does not run ROUNDS rounds of shuffles."""
  return min(ROUNDS, max(8, math.ceil(math.log2(max(nodes, 2))) + 4))


class NotConverged(RuntimeError):
  pass


def summed(counters) -> collections.Counter:
  """{name: value} of a metrics query's counters, those of one name summed (a counter of
  two steps); a runner that reports no committed value is read for its attempted one."""
  values = collections.Counter()
  for counter in counters:
    values[counter.key.metric.name] += (
        counter.committed if counter.committed is not None else counter.attempted)
  return values


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


_NONE = object()


def _changed(keyed, counter):
  """Counts the links in exactly one of the two sets (before, after); every link counts
  0 or 1, so the counter exists even where nothing changed."""
  _, (before, after) = keyed
  held = [next(iter(values), _NONE) is not _NONE for values in (before, after)]
  counter.inc(int(held[0] != held[1]))


class _Round(beam.PTransform):
  """One large-star or small-star step over links (u, v); links out, with a counter of
  the links that differ from the links in."""

  def __init__(self, step, namespace: str, name: str, once):
    super().__init__()
    self._step, self._namespace, self._name, self._once = step, namespace, name, once

  def expand(self, links):
    counter = beam.metrics.Metrics.counter(self._namespace, f"changed_{self._name}")
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
    # (a count of 0 once, so that a round over no links reports that it changed nothing;
    # one element for every round: their counts run in one stage)
    _ = self._once | f"Count nothing {self._name}" >> beam.Map(lambda zero: counter.inc(zero))
    return out


class Components(beam.PTransform):
  """Edges (a, b) in; (node, least node of its component) out, for every node of an
  edge. `rounds` pairs of large-star and small-star; the counters `changed_large_<k>` /
  `changed_small_<k>` of the namespace `NAMESPACE.<name>` say what each changed
  (`check_converged(result, this transform)`)."""

  def __init__(self, rounds: int = ROUNDS, name: str = "groups"):
    super().__init__()
    if rounds < 1:
      raise ValueError(f"connected components: rounds must be at least 1, not {rounds}")
    self.rounds, self.namespace = rounds, f"{NAMESPACE}.{name}"

  def expand(self, edges):
    links = (edges
             | "Drop loops" >> beam.Filter(lambda edge: edge[0] != edge[1])
             | "Ordered" >> beam.Map(lambda edge: (max(edge), min(edge)))
             | "Distinct edges" >> beam.Distinct())
    nodes = (edges
             | "Nodes" >> beam.FlatMap(lambda edge: edge)
             | "Distinct nodes" >> beam.Distinct())
    once = edges.pipeline | "Once" >> beam.Create([0])
    for number in range(self.rounds):
      links = links | f"Large {number}" >> _Round(_large_star, self.namespace,
                                                  f"large_{number}", once)
      links = links | f"Small {number}" >> _Round(_small_star, self.namespace,
                                                  f"small_{number}", once)
    # (at the end each node but its component's least has one link, to that least)
    return ({"least": links, "node": nodes | "Keyed" >> beam.Map(lambda n: (n, None))}
            | "Join" >> beam.CoGroupByKey()
            | "Each node" >> beam.Map(lambda kv: (kv[0], min(kv[1]["least"], default=kv[0]))))


def check_converged(result: beam.runners.runner.PipelineResult,
                    components: Components) -> dict:
  """{counter name: links changed} of `components` in a finished pipeline; NotConverged
  when its last round changed a link, and an error when the pipeline is not done or a
  counter of its last round is missing (a runner that reports no committed metrics is
  read for its attempted ones)."""
  state = result.state
  if state != beam.runners.runner.PipelineState.DONE:
    raise NotConverged(f"connected components: the pipeline is {state}, not done: its "
                       "counters say nothing yet")
  query = result.metrics().query(
      beam.metrics.MetricsFilter().with_namespace(components.namespace))
  changed = summed(query["counters"])  # (a round's count and its 0 come from two steps)
  last = [changed.get(f"changed_{step}_{components.rounds - 1}")
          for step in ("large", "small")]
  if None in last:
    raise NotConverged(f"connected components: the runner reported no count of the last "
                       f"round's changes ({components.namespace}): convergence unknown")
  if any(last):
    raise NotConverged(f"connected components: the last of {components.rounds} rounds "
                       f"still changed {sum(last)} link(s): the groups are not final; run "
                       "with more rounds")
  return dict(changed)
