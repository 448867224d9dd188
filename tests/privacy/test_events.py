import pytest

from sstq_fl.privacy.events import (
    ApproxDpEvent,
    ComposedEvent,
    DistributedDiscreteGaussianEvent,
    ExponentialMechanismEvent,
    GaussianEvent,
    LaplaceEvent,
    NonPrivateEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    PublicDataEvent,
    PureDpEvent,
    RandomizedResponseEvent,
    SelfComposedEvent,
    ShuffledLdpEvent,
    SkellamSumEvent,
)

ALL = [
    PureDpEvent(0.5), PureDpEvent(2.0, "add_or_remove_one"), ExponentialMechanismEvent(1.0),
    RandomizedResponseEvent.flat(3.0, 16), GaussianEvent(1.1), LaplaceEvent(2.0),
    PoissonSampledEvent(0.01, GaussianEvent(0.8)), SelfComposedEvent(PureDpEvent(0.1), 10),
    ComposedEvent((GaussianEvent(1.0), PoissonSampledEvent(0.5, PureDpEvent(1.0)))), NonPrivateEvent(), PublicDataEvent("x"),
    ApproxDpEvent(1.0, 1e-6), ApproxDpEvent(0.0, 1e-3, "add_or_remove_one"), ShuffledLdpEvent(2.0, 300),
    DistributedDiscreteGaussianEvent(3.0, 10, 40.0, 300.0, 64), SkellamSumEvent(9.0, 10, 40.0, 300.0),
]


@pytest.mark.parametrize("event", ALL, ids=lambda e: e.kind)
def test_every_event_round_trips_through_json(event):
    import json

    back = PrivacyEvent.from_json(json.loads(json.dumps(event.to_json())))
    assert back == event and hash(back) == hash(event)


def test_flat_rr_parametrisation():
    import math

    ev = RandomizedResponseEvent.flat(1.0, 4)
    keep = 1 - ev.noise_parameter + ev.noise_parameter / 4
    other = ev.noise_parameter / 4
    assert keep / other == pytest.approx(math.e)


@pytest.mark.parametrize("bad", [
    lambda: PureDpEvent(0), lambda: PureDpEvent(float("inf")), lambda: GaussianEvent(-1),
    lambda: PoissonSampledEvent(1.5, GaussianEvent(1)), lambda: SelfComposedEvent(GaussianEvent(1), -1),
    lambda: RandomizedResponseEvent(0.5, 1), lambda: PureDpEvent(1.0, "swap"), lambda: ApproxDpEvent(1.0, 0.0),
    lambda: ApproxDpEvent(1.0, 1.0), lambda: ApproxDpEvent(-1.0, 1e-6), lambda: ApproxDpEvent(1.0, 1e-6, "swap"),
])
def test_invalid_events(bad):
    with pytest.raises(ValueError):
        bad()


def test_unknown_kind_refused():
    with pytest.raises(ValueError, match="unknown privacy event kind"):
        PrivacyEvent.from_json({"kind": "epsilon_delta", "epsilon": 1.0})


BUILT_IN_KINDS = ["approx_dp", "composed", "distributed_discrete_gaussian", "exponential_mechanism", "gaussian",
                  "laplace", "non_private", "poisson_sampled", "public", "pure_dp", "randomized_response",
                  "self_composed", "shuffled_ldp", "skellam_sum"]


@pytest.fixture
def registry():
    """The event registry, restored after the test (a test may define and register its own event)."""
    from sstq_fl.privacy.events import EVENTS

    state = EVENTS.snapshot()
    yield EVENTS
    EVENTS.restore(state)


def test_the_registry_holds_every_built_in_kind(registry):
    assert registry.names() == BUILT_IN_KINDS
    assert all(registry[e.kind] is type(e) for e in ALL)


def test_a_second_event_under_a_taken_kind_is_refused_in_one_line(registry):
    from dataclasses import dataclass

    with pytest.raises(ValueError, match="privacy event named 'gaussian' is already registered") as info:
        @dataclass(frozen=True)
        class OtherGaussian(PrivacyEvent, kind="gaussian"):
            noise_multiplier: float
    assert "\n" not in str(info.value)


def test_a_new_event_is_accounted_and_replayed_without_any_other_change(registry, tmp_path):
    """A new mechanism is one class: the ledger composes it, the transcript replays it, and what it
    does not support is refused by the defaults."""
    import json
    from dataclasses import dataclass

    from sstq_fl.privacy.errors import UnsupportedEventError
    from sstq_fl.privacy.ledger import PrivacyLedger
    from sstq_fl.privacy.pld import pure_pld
    from sstq_fl.privacy.replay import replay

    @dataclass(frozen=True)
    class TwicePure(PrivacyEvent, kind="test_twice_pure"):
        """Two releases of an ε-DP mechanism, whose PLD is that of pure 2ε (no RDP form)."""

        epsilon: float

        def pld(self, relation, interval):
            return pure_pld(2 * self.epsilon, interval)

    ev = TwicePure(0.5)
    assert PrivacyEvent.from_json(json.loads(json.dumps(ev.to_json()))) == ev
    led = PrivacyLedger(discretization=1e-3)
    led.record(ev, 3)
    assert led.epsilon(1e-5) == float(pure_pld(1.0, 1e-3).self_compose(3).get_epsilon_for_delta(1e-5))
    assert led.rdp_epsilon(1e-5) is None and led.basic_epsilon() == float("inf")
    path = tmp_path / "t.jsonl"
    led.write_transcript(path)
    assert replay(path)["matches_recorded"]
    with pytest.raises(UnsupportedEventError, match="Poisson subsampling of a test_twice_pure event"):
        PrivacyLedger().record(PoissonSampledEvent(0.1, ev))


def test_an_approximate_release_is_its_epsilon_at_its_delta_under_its_relation_only():
    import math

    from sstq_fl.privacy.errors import UnsupportedEventError
    from sstq_fl.privacy.ledger import PrivacyLedger

    led = PrivacyLedger("replace_one")
    led.record(ApproxDpEvent(1.0, 1e-6))
    assert led.epsilon(1e-6) == pytest.approx(1.0, abs=1e-3) and math.isinf(led.epsilon(0.5e-6))
    with pytest.raises(UnsupportedEventError, match="holds under replace_one"):
        PrivacyLedger("add_or_remove_one").record(ApproxDpEvent(1.0, 1e-6))
