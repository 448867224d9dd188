"""StraightDP's latent space: the frozen public autoencoder (training, cache, reload), the clients' latent features
(clipped to R) and the latent DP-SGD task and flow model."""

import numpy as np
import pytest
import torch

from sstq_fl.data.workload import synthetic_records
from sstq_fl.gen.dpsgd import build_model, dpsgd_clipped_sum, per_example_clipped_sum
from sstq_fl.gen.runner import ClientContext
from sstq_fl.gen.straightdp import autoencoder as ae
from sstq_fl.gen.straightdp.blocks import FlowConfig, patchify, unpatchify
from sstq_fl.gen.straightdp.client_tasks import class_moments, client_features, latent_clipped_sum

SETTINGS = ae.AutoencoderSettings(steps=6, batch=16, seed=3)


def _images(n: int = 64) -> np.ndarray:
    return synthetic_records(n, seed=1)[0].astype(np.float32)


def test_autoencoder_trains_caches_and_reloads_identically(tmp_path):
    x = _images()
    model, sha = ae.public_autoencoder(x, SETTINGS, tmp_path)
    files = list(tmp_path.glob("autoencoder-*.pt"))
    assert len(files) == 1 and len(sha) == 64 and not any(p.requires_grad for p in model.parameters())
    again, sha2 = ae.public_autoencoder(x, SETTINGS, tmp_path)  # read back from the cache, not retrained
    assert sha2 == sha and all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                                  again.state_dict().values(), strict=True))
    z = ae.encode_images(model, x)
    assert z.shape == (64, ae.LATENT_DIM) and np.abs(z).max() < 1  # tanh-bounded, O(1)
    assert np.array_equal(z, ae.encode_images(again, x))
    img = ae.decode_latents(model, z)
    assert img.shape == (64, 1, 28, 28) and float(img.min()) >= 0 and float(img.max()) <= 1
    other, sha3 = ae.public_autoencoder(x, ae.AutoencoderSettings(steps=7, batch=16, seed=3), tmp_path)
    assert sha3 != sha and len(list(tmp_path.glob("autoencoder-*.pt"))) == 2  # the key covers every setting


def test_training_lowers_the_reconstruction_error():
    x = _images(128)
    xt = 2 * torch.as_tensor(x) - 1
    start = ae.seeded(ae.ConvAutoencoder, 0)
    trained = ae.train_autoencoder(x, ae.AutoencoderSettings(steps=60, batch=32, seed=0, lr=3e-3))
    with torch.no_grad():
        assert float((trained(xt) - xt).pow(2).mean()) < 0.7 * float((start(xt) - xt).pow(2).mean())


def _saturated_encoder(bias: float) -> dict[str, np.ndarray]:
    """An encoder whose latent is tanh(bias) in every coordinate, whatever the image."""
    model = ae.seeded(ae.ConvAutoencoder, 0)
    last = model.encoder[-2]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.fill_(bias)
    return ae.encoder_payload(model)


@pytest.mark.parametrize("bias,norm", [(10.0, 2.0), (0.01, float(np.sqrt(32) * np.tanh(0.01)))])
def test_latent_feature_is_clipped_to_r(bias, norm):
    """f = clip_R(z), P = I, no centering: a record whose latent is large contributes exactly ‖f‖ = R."""
    x, y = _images(5), np.array([1, 1, 2, 3, 3])
    payload = {"P": np.eye(32), "m_pub": np.zeros(32), **_saturated_encoder(bias)}
    ctx = ClientContext(0, x, y, 0, 0)
    f = client_features(ctx, payload, {"r_f": 2.0})
    assert f.shape == (5, 32) and np.allclose(np.linalg.norm(f, axis=1), norm, rtol=1e-9)
    out = class_moments(ctx, payload, {"r_f": 2.0, "bound": 2.0})
    assert np.allclose(out["sums_w"][1], 2 * f[0] / 4.0) and out["counts"].tolist()[:4] == [0, 2, 1, 2]


def test_latent_flow_model_patches_and_per_example_grads():
    cfg = FlowConfig.profile("cpu", space="latent")
    assert cfg.patch == 1 and cfg.grid == 4 and cfg.dim == 32 and cfg.noise_cols == 34
    z = torch.randn(3, 2, 4, 4)
    assert torch.equal(unpatchify(patchify(z, 1), 1, (2, 4, 4)), z) and patchify(z, 1).shape == (3, 16, 2)
    model = build_model({"model": "straightdp-flow", "profile": "cpu", "space": "latent", "multiplicity": 2})
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}
    y = torch.tensor([0, 4, 9])
    noise = model.draw_noise(3, torch.Generator().manual_seed(0))
    assert noise.shape == (3, 2, 34) and model(z, y, noise).shape == (3,)
    s = per_example_clipped_sum(model, params, z, y, 0.5, noise, buffers)
    assert torch.sqrt(sum(v.pow(2).sum() for v in s.values())) <= 3 * 0.5 + 1e-5


def test_latent_round_is_the_dpsgd_round_on_the_clients_latents():
    model = build_model({"model": "straightdp-flow", "profile": "cpu", "space": "latent"})
    enc = ae.seeded(ae.ConvAutoencoder, 5)
    x, y = _images(40), np.arange(40) % 10
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    conf = {"model": "straightdp-flow", "profile": "cpu", "space": "latent", "q": 0.5, "clip": 1.0}
    got = latent_clipped_sum(ClientContext(2, x, y, 7, 3), {**state, **ae.encoder_payload(enc)}, conf)
    lat = ae.encode_images(enc, x).astype(np.float32).reshape(40, 2, 4, 4)
    want = dpsgd_clipped_sum(ClientContext(2, lat, y, 7, 3), state, conf)  # the same (reproducible) coins
    assert got.keys() == want.keys() and all(np.allclose(got[k], want[k], atol=1e-6) for k in got)
    assert not any(k.startswith(ae.PREFIX) for k in got)  # the reply is the flow model's gradient only
    with pytest.raises(ValueError, match="needs the frozen encoder"):
        latent_clipped_sum(ClientContext(2, x, y, 7, 3), state, conf)
