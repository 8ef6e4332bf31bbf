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
pairs of the two, each step's changed links counted (a Beam counter, `changed_large_<k>`,
`changed_small_<k>`, counted in the next step's grouping, and 0 once a step so that a
step without changes reports 0, not nothing): one shuffle a step. `check_converged`
raises when the last round still changed something (the result is then not the
components, and saying so is the only honest answer), and when the pipeline is not done
or its runner did not report that count. Both steps leave a star forest as it is, and
only a star forest (a review checked every link set on up to 6 nodes). A node's
neighbours are gathered on one worker (a `CombinePerKey` of the distinct values): a
node with most of the edges is a skew the grouping before this must avoid. Nodes are
any totally ordered, picklable values (ints, strings); every node is in the output with
the least node of its component, itself for the least.
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


# What a node's grouping holds of a link: (first, second) seen from either end, a link of
# the step before (keyed by its first node), or the node itself.
_FIRST, _SECOND, _BEFORE, _NODE = range(4)


def _both_ends(link):
  first, second = link
  yield first, (_FIRST, second)
  yield second, (_SECOND, first)


def _before(link):
  return link[0], (_BEFORE, link[1])


def _changed(tagged, counter) -> set:
  """Counts the links of a node (keyed by their first node) in exactly one of the step's
  links in and its links out; returns the node's links out (its second nodes)."""
  before = {node for tag, node in tagged if tag == _BEFORE}
  after = {node for tag, node in tagged if tag == _FIRST}
  counter.inc(len(before ^ after))
  return after


class _Step:
  """One grouping by node: counts what the last step changed (when there is one), then
  runs this step (when there is one) over the node's distinct neighbours."""

  def __init__(self, step, counted, grouped):
    self._step, self._counted, self._grouped = step, counted, grouped

  def __call__(self, node_tagged):
    node, tagged = node_tagged
    self._grouped.update(len(tagged))
    if self._counted is not None:
      _changed(tagged, self._counted)
    neighbours = {other for tag, other in tagged if tag in (_FIRST, _SECOND)}
    if neighbours:
      yield from self._step((node, neighbours))


def _count(zero, counter):
  counter.inc(zero)


def _least(node_tagged, counted):
  node, tagged = node_tagged
  after = _changed(tagged, counted)
  if any(tag == _NODE for tag, _ in tagged):
    yield node, min(after, default=node)


class Components(beam.PTransform):
  """Edges (a, b) in; (node, least node of its component) out, for every node of an
  edge. `rounds` pairs of large-star and small-star; the counters `changed_large_<k>` /
  `changed_small_<k>` of the namespace `NAMESPACE.<name>` say what each changed
  (`check_converged(result, this transform)`), its distribution `grouped` how many
  values a node's grouping held (its max is the skew: at most twice the node's links).

  One shuffle a step: a node's grouping holds its distinct links both ways (the step's
  neighbours) and the links of the step before keyed by their first node, whose
  difference from the links out, node by node, sums to the step before's changes; the
  last step's are counted where each node takes its least. Each grouping is a set: a
  large-star step sends (v, least) once from every neighbour of v with that least, and
  the repeats are dropped before the shuffle, bundle by bundle, and as a node's values
  merge, so that a node holds each of its links once, not once a sender."""

  def __init__(self, rounds: int = ROUNDS, name: str = "groups"):
    super().__init__()
    if rounds < 1:
      raise ValueError(f"connected components: rounds must be at least 1, not {rounds}")
    self.rounds, self.namespace = rounds, f"{NAMESPACE}.{name}"

  def expand(self, edges):
    links = (edges
             | "Drop loops" >> beam.Filter(lambda edge: edge[0] != edge[1])
             | "Ordered" >> beam.Map(lambda edge: (max(edge), min(edge))))
    steps = [(step, f"{kind}_{number}") for number in range(self.rounds)
             for step, kind in ((_large_star, "large"), (_small_star, "small"))]
    # (a count of 0 once a step, so that a step over no links reports that it changed
    # nothing; one element for every step: their counts run in one stage)
    once = edges.pipeline | "Once" >> beam.Create([0])
    counted, before = None, None
    grouped = beam.metrics.Metrics.distribution(self.namespace, "grouped")
    for step, name in steps:
      held = [links | f"Ends {name}" >> beam.FlatMap(_both_ends)]
      if before is not None:
        held.append(before | f"Before {name}" >> beam.Map(_before))
      before = links
      links = (held
               | f"Flatten {name}" >> beam.Flatten()
               | f"Neighbours {name}" >> beam.CombinePerKey(beam.combiners.ToSetCombineFn())
               | f"Step {name}" >> beam.FlatMap(_Step(step, counted, grouped)))
      counted = beam.metrics.Metrics.counter(self.namespace, f"changed_{name}")
      _ = once | f"Count nothing {name}" >> beam.Map(_count, counted)
    nodes = edges | "Nodes" >> beam.FlatMap(lambda edge: [(node, (_NODE, None))
                                                          for node in edge])
    # (at the end each node but its component's least has one link, to that least)
    return ((links | "Last" >> beam.Map(lambda link: (link[0], (_FIRST, link[1]))),
             before | "Before last" >> beam.Map(_before), nodes)
            | "Flatten last" >> beam.Flatten()
            | "Join" >> beam.CombinePerKey(beam.combiners.ToSetCombineFn())
            | "Each node" >> beam.FlatMap(_least, counted))


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
