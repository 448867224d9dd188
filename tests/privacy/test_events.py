import pytest

from sstq_fl.privacy.events import (
    ComposedEvent,
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
)

ALL = [
    PureDpEvent(0.5), PureDpEvent(2.0, "add_or_remove_one"), ExponentialMechanismEvent(1.0),
    RandomizedResponseEvent.flat(3.0, 16), GaussianEvent(1.1), LaplaceEvent(2.0),
    PoissonSampledEvent(0.01, GaussianEvent(0.8)), SelfComposedEvent(PureDpEvent(0.1), 10),
    ComposedEvent((GaussianEvent(1.0), PoissonSampledEvent(0.5, PureDpEvent(1.0)))), NonPrivateEvent(), PublicDataEvent("x"),
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
    lambda: RandomizedResponseEvent(0.5, 1), lambda: PureDpEvent(1.0, "swap"),
])
def test_invalid_events(bad):
    with pytest.raises(ValueError):
        bad()


def test_unknown_kind_refused():
    with pytest.raises(ValueError, match="unknown privacy event kind"):
        PrivacyEvent.from_json({"kind": "epsilon_delta", "epsilon": 1.0})
