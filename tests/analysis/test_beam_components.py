"""Connected components on Beam (DirectRunner): the components a union-find gives, for
chains up to 20 long, stars, cliques and random graphs; a last round that still changes
links is an error, never a silent answer."""

import random

import pytest

beam = pytest.importorskip("apache_beam")
from apache_beam.testing import util as beam_testing  # noqa: E402

from imagesets.analysis import beam_components  # noqa: E402


def _union_find(edges) -> dict:
  parent = {}

  def root(node):
    parent.setdefault(node, node)
    while parent[node] != node:
      parent[node] = parent[parent[node]]
      node = parent[node]
    return node

  for a, b in edges:
    ra, rb = root(a), root(b)
    if ra != rb:
      parent[max(ra, rb)] = min(ra, rb)
  return {node: root(node) for node in list(parent)}


def _run(edges, rounds):
  """((node, least) pairs, changes per counter) of the Beam transform."""
  pipeline = beam.Pipeline()
  components = beam_components.Components(rounds)
  out = (pipeline | beam.Create(edges) | components)
  beam_testing.assert_that(out, beam_testing.equal_to(sorted(_union_find(edges).items())))
  result = pipeline.run()
  result.wait_until_finish()
  return beam_components.check_converged(result, components)


def _graphs():
  rng = random.Random(5)
  edges = []
  start = 0
  for length in (2, 3, 5, 8, 13, 20):  # chains, their nodes in a shuffled order
    nodes = list(range(start, start + length))
    rng.shuffle(nodes)
    edges += list(zip(nodes, nodes[1:]))
    start += length
  edges += [(start, start + k) for k in range(1, 30)]  # a star of 30
  start += 30
  edges += [(start + a, start + b) for a in range(6) for b in range(6) if a < b]  # a clique
  start += 6
  edges += [(rng.randrange(start, start + 200), rng.randrange(start, start + 200))
            for _ in range(150)]  # random: components of many sizes, loops, repeats
  edges.append((7, 7))
  return edges


def test_the_components_are_a_union_finds_and_the_last_rounds_change_nothing():
  edges = _graphs()
  changed = _run(edges, rounds=6)
  # (a chain of 20, shuffled, settles within 4 pairs of rounds)
  assert changed.get("changed_large_4", 0) == changed.get("changed_small_4", 0) == 0, changed
  assert changed["changed_large_0"] > 0


def test_string_nodes_take_the_least_name():
  edges = [("b/2.jpg", "a/9.jpg"), ("c/1.jpg", "b/2.jpg"), ("x.jpg", "y.jpg")]
  _run(edges, rounds=4)


def _finished(edges, rounds):
  pipeline = beam.Pipeline()
  components = beam_components.Components(rounds)
  _ = pipeline | beam.Create(edges) | components
  result = pipeline.run()
  result.wait_until_finish()
  return result, components


@pytest.mark.parametrize("edges", [
    "chain of 64",
    [(2, 0), (2, 1), (3, 1)],   # (one round: large-star still changes, small-star not)
    [(1, 0), (2, 1), (3, 2)]])  # (one round: small-star still changes, large-star not)
def test_too_few_rounds_are_an_error_not_an_answer(edges):
  if edges == "chain of 64":
    nodes = list(range(64))
    random.Random(1).shuffle(nodes)
    edges = list(zip(nodes, nodes[1:]))
  result, components = _finished(edges, rounds=1)
  with pytest.raises(beam_components.NotConverged, match="last of 1 rounds still changed"):
    beam_components.check_converged(result, components)


class _Reported:
  """A pipeline result as a runner reports it: its state, its counters' values."""

  def __init__(self, state, counters):
    self.state, self._counters = state, counters

  def metrics(self):
    counters = self._counters

    class _Metrics:
      def query(self, _filter):
        return {"counters": counters}
    return _Metrics()


def test_a_count_the_runner_did_not_report_is_no_answer():
  """A pipeline not done, a runner without the last round's counter, or one that reports
  only attempted values (Flink's): never taken for 0 changes."""
  components = beam_components.Components(rounds=2)
  result, _ = _finished([(1, 0)], rounds=2)
  done = beam.runners.runner.PipelineState.DONE
  counters = result.metrics().query(beam.metrics.MetricsFilter().with_namespace(
      components.namespace))["counters"]
  assert beam_components.check_converged(_Reported(done, counters), components)
  with pytest.raises(beam_components.NotConverged, match="not done"):
    beam_components.check_converged(_Reported("RUNNING", counters), components)
  with pytest.raises(beam_components.NotConverged, match="no count of the last round"):
    beam_components.check_converged(_Reported(done, counters[:1]), components)

  class _Attempted:
    def __init__(self, counter, attempted):
      self.key, self.committed, self.attempted = counter.key, None, attempted

  # (each of the last round's two counters reported by two steps, 1 each)
  with pytest.raises(beam_components.NotConverged, match="still changed 4 link"):
    beam_components.check_converged(
        _Reported(done, [_Attempted(c, 1) for c in counters]), components)
  with pytest.raises(ValueError, match="at least 1"):
    beam_components.Components(rounds=0)


def test_no_edges_converge_at_once():
  # (a dataset without near pairs: every round's count is 0, not missing)
  changed = _run([], rounds=3)
  assert changed == {f"changed_{step}_{n}": 0 for n in range(3) for step in ("large", "small")}


class _Counted:
  """A finished pipeline's result whose runner reports the given counters, in that order."""

  def __init__(self, counters):
    self.state = beam.runners.runner.PipelineState.DONE
    self._counters = [type("Result", (), {"key": type("Key", (), {"metric": type(
        "Metric", (), {"name": name})})(), "committed": value, "attempted": value})()
                      for name, value in counters]

  def metrics(self):
    counters = self._counters
    return type("Metrics", (), {"query": lambda self, _: {"counters": counters}})()


def test_a_rounds_count_from_two_steps_is_summed_in_any_order():
  # Each round reports its changes from the links and a 0 from a step of its own (so that
  # a round over no links says 0): a runner may list them in either order.
  components = beam_components.Components(rounds=1)
  for order in (1, -1):
    counted = [("changed_large_0", 78), ("changed_large_0", 0), ("changed_small_0", 3),
               ("changed_small_0", 0)][::order]
    with pytest.raises(beam_components.NotConverged, match="still changed 81"):
      beam_components.check_converged(_Counted(counted), components)


def _rounds_to_settle(edges) -> int:
  """The rounds (large-star then small-star) `Components` runs until one changes no link
  (that one counted), as its steps do on Beam: the same functions, a set of links."""
  import collections
  links = {(max(edge), min(edge)) for edge in edges if edge[0] != edge[1]}
  rounds = 0
  while True:
    rounds += 1
    changed = False
    for step in (beam_components._large_star, beam_components._small_star):
      neighbours = collections.defaultdict(list)
      for a, b in links:
        neighbours[a].append(b)
        neighbours[b].append(a)
      out = {link for item in neighbours.items() for link in step(item)}
      changed |= out != links
      links = out
    if not changed:
      return rounds


def test_the_rounds_stated_for_a_graph_settle_its_slowest_shapes():
  """`rounds_for(n)`: shuffled chains (the slowest graphs measured), random trees and
  stars of n nodes settle within the rounds stated for n, with rounds to spare; the
  count grows with n to ROUNDS and never past it."""
  rng = random.Random(0)
  assert beam_components.rounds_for(1) == 8 and beam_components.rounds_for(10 ** 9) == 20
  sizes = [2, 3, 5, 20, 64, 200, 1000, 2000, 5000] + [rng.randrange(2, 3000) for _ in range(12)]
  for n in sizes:
    stated = beam_components.rounds_for(n)
    assert stated <= beam_components.rounds_for(n + 1)
    labels = rng.sample(range(10 * n), n)
    shapes = {"chain": [(labels[i], labels[i + 1]) for i in range(n - 1)],
              "tree": [(labels[i], labels[rng.randrange(i)]) for i in range(1, n)],
              "star": [(labels[0], labels[i]) for i in range(1, n)]}
    for shape, edges in shapes.items():
      settled = _rounds_to_settle(edges)
      assert settled + 2 <= stated, (n, shape, settled, stated)


def _changes_per_step(edges, rounds) -> dict:
  """{counter: links changed} of each step, as sets of links compute them."""
  import collections
  links = {(max(edge), min(edge)) for edge in edges if edge[0] != edge[1]}
  changed = {}
  for number in range(rounds):
    for step, kind in ((beam_components._large_star, "large"),
                       (beam_components._small_star, "small")):
      neighbours = collections.defaultdict(set)
      for a, b in links:
        neighbours[a].add(b)
        neighbours[b].add(a)
      out = {link for item in neighbours.items() for link in step(item)}
      changed[f"changed_{kind}_{number}"] = len(links ^ out)
      links = out
  return changed


def test_each_steps_count_is_the_links_it_changed_and_a_step_is_one_shuffle():
  """The counters are each step's changes (links may reach a grouping repeated, and
  repeated edges come in), and a step costs one GroupByKey: 2 a round and the join."""
  edges = _graphs()
  edges += edges[:40]  # (repeated edges)
  assert _run(edges, rounds=5) == _changes_per_step(edges, rounds=5)
  for rounds in (1, 4):
    pipeline = beam.Pipeline()
    _ = pipeline | beam.Create(edges) | "Components" >> beam_components.Components(rounds)
    transforms = pipeline.to_runner_api().components.transforms.values()
    shuffles = sum(t.spec.urn == "beam:transform:group_by_key:v1"
                   and t.unique_name.startswith("Components/") for t in transforms)
    assert shuffles == 2 * rounds + 1, (rounds, shuffles)


def test_a_nodes_grouping_holds_its_distinct_links_not_one_a_sender():
  """In a clique of 49, a large-star step sends (v, least) from each of v's lower
  neighbours: the least node's grouping holds each link once (its links and the step
  before's: at most 2 x 48 values), not one copy a sender (1,176)."""
  nodes = 49
  edges = [(a, b) for a in range(nodes) for b in range(a + 1, nodes)]
  pipeline = beam.Pipeline()
  components = beam_components.Components(rounds=2)
  _ = pipeline | beam.Create(edges) | components
  result = pipeline.run()
  result.wait_until_finish()
  steps = result.metrics().query(beam.metrics.MetricsFilter().with_namespace(
      components.namespace).with_name("grouped"))["distributions"]
  largest = max(step.committed.max for step in steps)  # (each step reports its own)
  assert len(steps) == 4 and nodes - 1 <= largest <= 2 * (nodes - 1), largest
