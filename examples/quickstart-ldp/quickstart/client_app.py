"""quickstart: A Flower / PyTorch app."""

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from quickstart.task import Net, load_data
from quickstart.task import test as test_fn
from quickstart.task import train as train_fn
from sstq_fl.flower import LdpEncodeMod, LdpSettings

# Flower ClientApp
LDP = ("encoder", "epsilon", "radius")  # run-config keys of the encoder (the ServerApp reads them too)
app = ClientApp(mods=[LdpEncodeMod(settings=lambda msg, ctx: LdpSettings(**{k: ctx.run_config[k] for k in LDP}))])


def _setup(msg: Message, context: Context) -> tuple[Net, torch.device, tuple]:
    """The model initialized with the received weights, the device, and this node's data loaders."""
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    model.to(device)
    cfg = context.run_config
    loaders = load_data(int(context.node_config["partition-id"]), int(context.node_config["num-partitions"]),
                        int(cfg["batch-size"]), int(cfg["max-examples"]), str(cfg["data-dir"]))
    return model, device, loaders


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Train the model on local data."""
    model, device, (trainloader, _) = _setup(msg, context)

    # Call the training function
    lr = float(msg.content["config"]["lr"])  # type: ignore[arg-type]
    train_loss = train_fn(model, trainloader, int(context.run_config["local-epochs"]), lr, device)

    # Construct and return reply Message
    model_record = ArrayRecord(model.state_dict())
    metrics = {"train_loss": train_loss, "num-examples": len(trainloader.dataset)}
    content = RecordDict({"arrays": model_record, "metrics": MetricRecord(metrics)})
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Evaluate the model on local data."""
    model, device, (_, valloader) = _setup(msg, context)

    # Call the evaluation function
    eval_loss, eval_acc = test_fn(model, valloader, device)

    # Construct and return reply Message
    metrics = {"eval_loss": eval_loss, "eval_acc": eval_acc, "num-examples": len(valloader.dataset)}
    content = RecordDict({"metrics": MetricRecord(metrics)})
    return Message(content=content, reply_to=msg)
