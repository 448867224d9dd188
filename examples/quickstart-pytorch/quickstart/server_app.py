"""quickstart: A Flower / PyTorch app."""

import json
import os
import time
from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from quickstart.task import Net, load_centralized_dataset
from quickstart.task import test as test_fn

# Create ServerApp
app = ServerApp()


class CentralEvaluation:
    """``evaluate_fn``: the global model on the whole test set, before the first round and after
    each round; every call is kept with its start and end time (``time.time()``)."""

    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self.rounds: list[dict[str, float]] = []

    def __call__(self, server_round: int, arrays: ArrayRecord) -> MetricRecord:
        """Evaluate model on central data."""
        start = time.time()
        model = Net()
        model.load_state_dict(arrays.to_torch_state_dict())
        device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
        loss, accuracy = test_fn(model, load_centralized_dataset(self.data_dir), device)
        self.rounds.append({"round": server_round, "start": start, "end": time.time(), "loss": loss, "accuracy": accuracy})
        return MetricRecord({"accuracy": accuracy, "loss": loss})


def save(out_dir: Path, arrays: ArrayRecord, central: list[dict[str, float]]) -> None:
    """Save the final model (``final_model.pt``) and the central evaluations (``result.json``)."""
    print("\nSaving final model to disk...")
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.save(arrays.to_torch_state_dict(), out_dir / "final_model.pt")
    tmp = out_dir / "result.json.tmp"
    tmp.write_text(json.dumps({"central_evaluation": central}, indent=1))
    os.replace(tmp, out_dir / "result.json")


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Main entry point for the ServerApp."""
    # Read run config
    fraction_train = float(context.run_config["fraction-train"])
    fraction_evaluate = float(context.run_config["fraction-evaluate"])
    num_rounds = int(context.run_config["num-server-rounds"])
    lr = float(context.run_config["lr"])
    evaluate_fn = CentralEvaluation(str(context.run_config["data-dir"]))

    # Load global model
    global_model = Net()
    arrays = ArrayRecord(global_model.state_dict())

    # Initialize FedAvg strategy
    strategy = FedAvg(fraction_train=fraction_train, fraction_evaluate=fraction_evaluate)

    # Start strategy, run FedAvg for `num_rounds`
    result = strategy.start(grid=grid, initial_arrays=arrays, train_config=ConfigRecord({"lr": lr}),
                            num_rounds=num_rounds, evaluate_fn=evaluate_fn)

    # Save final model and the central evaluations to disk
    save(Path(str(context.run_config["out-dir"])), result.arrays, evaluate_fn.rounds)
