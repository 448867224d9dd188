"""The project's ``ClientApp``: one simulated client of an sstq-fl run, and of its DP workloads.

Built like any Flower app that adopts an sstq-fl encoder: the ``train`` handler returns its local
model as the ArrayRecord ``arrays`` (one SGD step at unit learning rate on its minibatch,
``θ − g``, with ``num-examples``), and :class:`sstq_fl.flower.LdpEncodeMod` turns the reply into
the ε-LDP wire message of the pseudo-gradient ``θ − (θ − g) = g``, clipped to ``clip``.  The
server takes the step with its learning rate (``FedAvgM``).  The run config is read from
``context.run_config`` (``flwr run``), or from the message where the in-process launcher sends
it (Flower's in-process simulation has no run config).

With ``randomness=secure`` (the deployment default) the client draws fresh keys from its own OS
CSPRNG for its minibatch and, in the mod, for its encoding coins, and never sends them; with
``reproducible`` everything is derived from ``(seed, round, client)``, so the reply is the same
whichever actor runs it (simulation only).  Only the mechanism's output leaves the client: the
wire message and ``num-examples`` (the public batch size).

``train.cohort`` messages (simulation, ``clients-per-node`` > 1) make the node a cohort of virtual
clients: it runs the ones the message names batched, as the in-process engine runs a round
(:meth:`sstq_fl.fl.clients.ClientData.messages`: each client its own coins, in secure mode its own
OS-CSPRNG key) and replies with one wire message per virtual client
(:mod:`sstq_fl.flower.cohort`); a one-shot ``flwr-clientapp`` process (a deployment) refuses them.

``train.gen`` messages run a registered client task of a DP generative workload
(:mod:`sstq_fl.flower.apps.gen_client`), through the client's ledger like every other reply: an LDP
release is charged, a sum for a trusted aggregator needs the node operator's opt-in.  Every handler
:func:`make_client_app` registers releases through a ledger (``query`` releases only the node's public
partition id); no environment variable changes what a client sends.  ``query`` reports the node's partition
(:func:`sstq_fl.flower.discovery.answer_query`); a long-lived process (a simulation actor) warms
its heavy imports up meanwhile, a one-shot ``flwr-clientapp`` process does not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import dp_accounting  # noqa: F401  (the client ledger's accountants, loaded with the app, not inside a timed round)
import numpy as np
import scipy.stats  # noqa: F401  (the exact pure-ε composition's binomial terms, idem)
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import Mod

from sstq_fl.flower import LdpEncodeMod, LdpSettings, client_ledger
from sstq_fl.flower.cohort import (
    COHORT_ACTION,
    KEY_REFUSALS,
    cohort_of,
    cohort_record,
    deployment_process,
    node_clients,
    refusal_record,
    refuse_in_deployment,
)
from sstq_fl.flower.discovery import answer_query
from sstq_fl.flower.mod import check_server, encoder_for, server_round
from sstq_fl.process import tune_allocator

from .gen_client import run_task
from .secagg_client import route_train
from .shards import client_data

if TYPE_CHECKING:
    from sstq_fl.config.train import RunConfig


def run_config(msg: Message, context: Context) -> RunConfig:
    """This message's run config: the one it carries (in-process launcher), else ``context.run_config``."""
    from sstq_fl.config.flower import config_from_run_config
    from sstq_fl.config.train import RunConfig
    from sstq_fl.gen.pipelines import prefixes

    conf: Any = msg.content.config_records.get("config", {})
    if "run-config" in conf:
        return RunConfig(**json.loads(str(conf["run-config"])))
    return config_from_run_config(dict(context.run_config), prefixes())[0]


def ldp_settings(msg: Message, context: Context) -> LdpSettings:
    """The mod's settings from the run config's declarations (:meth:`LdpSettings.from_config`)."""
    return LdpSettings.from_config(run_config(msg, context))


def query(msg: Message, context: Context) -> Message:
    if not deployment_process():  # a flwr-clientapp handles one message; warm a long-lived process up
        import torch  # noqa: F401

        import sstq_fl.fl.engine  # noqa: F401
    return answer_query(msg, context)


def train(msg: Message, context: Context) -> Message:
    """One SGD step at unit learning rate: reply ``θ − g`` (float64, so that ``θ − (θ − g) = g`` exactly)."""
    import torch

    from sstq_fl.fl.round_draws import client_coins

    cfg = run_config(msg, context)
    data = client_data(json.dumps(asdict(cfg), sort_keys=True))
    content: Any = msg.content
    t, pid = int(content["config"]["server-round"]), int(context.node_config["partition-id"])
    theta = torch.from_numpy(np.array(content["arrays"]["theta"].numpy()))
    g, _ = data.gradients(theta, t, np.array([pid]), client_coins(cfg.randomness, cfg.seed, t, np.array([pid])))
    local = theta.double().numpy() - g[0].double().numpy()
    return Message(RecordDict({"arrays": ArrayRecord({"theta": Array(local)}),
                               "metrics": MetricRecord({"num-examples": cfg.batch})}), reply_to=msg)


def cohort(msg: Message, context: Context) -> Message:
    """A cohort node (simulation): its virtual clients the message names, batched as the in-process engine
    batches a round (:meth:`sstq_fl.fl.clients.ClientData.messages`): one wire message per client, each
    encoded with that client's own coins (secure: its own OS-CSPRNG key, drawn here and never sent).  Each
    virtual client keeps its own ledger in the node's state; one past its budget sends no message, and its
    refusal travels in the reply's :data:`~sstq_fl.flower.cohort.KEY_REFUSALS` record."""
    import torch

    cfg = run_config(msg, context)
    ids = _cohort_ids(msg, context, cfg)
    data = client_data(json.dumps(asdict(cfg), sort_keys=True))
    content: Any = msg.content
    theta = torch.from_numpy(np.array(content["arrays"]["theta"].numpy()))
    enc = encoder_for(cfg.encoder, int(theta.numel()), cfg.epsilon, cfg.clip, cfg.seed)
    check_server(msg, enc.for_round(server_round(msg)))  # the server names the round's frame
    found = client_ledger.budgets(cfg.client_budget_epsilon, cfg.delta, context.node_config)
    ids, refused = client_ledger.admit(context, ids, enc.privacy_event(), found)  # each its own ledger and budget
    blobs, _ = data.messages(enc, theta, server_round(msg), np.asarray(ids, dtype=np.int64))
    for c in ids:  # charged once its message exists, before the reply leaves
        client_ledger.charge(context, c, enc.privacy_event(), found, cfg.delta)
    return Message(RecordDict({"arrays": cohort_record(ids, blobs), KEY_REFUSALS: refusal_record(refused),
                               "metrics": MetricRecord({"num-examples": cfg.batch})}), reply_to=msg)


def _cohort_ids(msg: Message, context: Context, cfg: RunConfig) -> list[int]:
    """The virtual clients a cohort message asks this node for; ``ValueError`` for a deployment (one
    client per SuperNode) or for clients this node does not host."""
    refuse_in_deployment(cfg.clients_per_node)
    ids, hosted = cohort_of(msg), node_clients(int(context.node_config["partition-id"]), cfg.clients,
                                               cfg.clients_per_node)
    if not ids or any(c not in hosted for c in ids) or len(set(ids)) != len(ids):
        raise ValueError(f"the cohort message asks for clients {ids[:4]}... but this node hosts {hosted}")
    return ids


def make_client_app(mods: Sequence[Mod] = (), node_defaults: Mapping[str, Any] | None = None, *,
                    flower_log: bool = True, malloc_tuning: bool = True) -> ClientApp:
    """The project's ClientApp: ``train`` (through :class:`~sstq_fl.flower.LdpEncodeMod`, or, for a SecAgg+
    message of ``trust=secagg``, through Flower's ``secaggplus_mod``: :func:`~.secagg_client.route_train`), ``train.cohort``,
    ``train.gen`` and ``query``.  ``mods`` wrap every handler (outermost first: Flower's ``ClientApp(mods=...)``);
    ``node_defaults``: node config for the nodes a simulation starts, which have none of their own (the node's
    own config wins), e.g. ``{"trust-aggregator": True}`` where the CLI opts in for the nodes it starts;
    ``flower_log``: the client ledger's INFO lines go to Flower's log stream; ``malloc_tuning``: the app's
    lifespan sets the C allocator's thresholds of the node's process, once (:func:`sstq_fl.process.tune_allocator`:
    the node process's entry point is the app)."""
    defaults = dict(node_defaults or {})
    client_app = ClientApp(mods=list(mods))

    @client_app.lifespan()
    def process(context: Context) -> Iterator[None]:
        """The node process's allocator thresholds (once per process; nothing is set on import)."""
        if malloc_tuning:
            tune_allocator()
        yield

    client_app.query()(query)
    ldp = LdpEncodeMod(settings=ldp_settings, metrics="num-examples", flower_log=flower_log)
    client_app.train(mods=[route_train, ldp])(train)
    client_app.train(COHORT_ACTION)(cohort)

    def gen(msg: Message, context: Context) -> Message:
        """A DP generative workload's client task (``train.gen``), through the client's ledger."""
        return run_task(msg, context, defaults)

    client_app.train("gen")(gen)
    return client_app


app = make_client_app()
"""The ClientApp of ``flwr run`` and of the simulations the package starts (no node defaults: a deployment's
SuperNode sets its own node config)."""
