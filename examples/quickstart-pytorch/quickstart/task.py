"""quickstart: A Flower / PyTorch app."""

from functools import lru_cache

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from sstq_fl.data.idx import load_fashion_mnist


class Net(nn.Module):
    """Model (simple CNN adapted from 'PyTorch: A 60 Minute Blitz', for 28x28 grey images)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 4 * 4, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits for a batch of images ``[N, 1, 28, 28]``."""
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = x.view(-1, 16 * 4 * 4)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


@lru_cache(maxsize=1)
def fashion_mnist(data_dir: str = "") -> tuple[TensorDataset, TensorDataset]:
    """Fashion-MNIST ``(train, test)`` as tensors normalized to [-1, 1], read once per process
    from the IDX files (``data_dir``, else ``$SSTQ_FL_FMNIST`` or /usr/share/datasets/fashion-mnist)."""
    xtr, ytr, xte, yte = load_fashion_mnist(data_dir or None)

    def images(x: np.ndarray) -> torch.Tensor:
        return (torch.from_numpy(x).view(-1, 1, 28, 28) - 0.5) / 0.5

    return TensorDataset(images(xtr), torch.from_numpy(ytr)), TensorDataset(images(xte), torch.from_numpy(yte))


def load_data(partition_id: int, num_partitions: int, batch_size: int, max_examples: int = 0,
              data_dir: str = "") -> tuple[DataLoader, DataLoader]:
    """IID partition ``partition_id`` of ``num_partitions`` of the training set (at most ``max_examples``
    examples when positive), split 80% train / 20% validation."""
    train_set, _ = fashion_mnist(data_dir)
    order = np.random.default_rng(42).permutation(len(train_set))
    part = np.array_split(order, num_partitions)[partition_id]
    part = part[:max_examples] if max_examples > 0 else part
    cut = int(0.8 * len(part))
    trainloader = DataLoader(torch.utils.data.Subset(train_set, part[:cut].tolist()), batch_size=batch_size, shuffle=True)
    valloader = DataLoader(torch.utils.data.Subset(train_set, part[cut:].tolist()), batch_size=batch_size)
    return trainloader, valloader


def load_centralized_dataset(data_dir: str = "") -> DataLoader:
    """The whole Fashion-MNIST test set (10,000 images)."""
    _, test_set = fashion_mnist(data_dir)
    return DataLoader(test_set, batch_size=1000)


def train(net: nn.Module, trainloader: DataLoader, epochs: int, lr: float, device: torch.device) -> float:
    """Train the model on the training set; returns the mean training loss."""
    net.to(device)  # move model to GPU if available
    criterion = torch.nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    net.train()
    running_loss = 0.0
    for _ in range(epochs):
        for images, labels in trainloader:
            optimizer.zero_grad()
            loss = criterion(net(images.to(device)), labels.to(device))
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
    return running_loss / (epochs * len(trainloader))


def test(net: nn.Module, testloader: DataLoader, device: torch.device) -> tuple[float, float]:
    """Validate the model on the test set; returns ``(mean loss, accuracy)``."""
    net.to(device)
    net.eval()
    criterion = torch.nn.CrossEntropyLoss(reduction="sum")
    correct, loss = 0, 0.0
    with torch.no_grad():
        for images, labels in testloader:
            outputs = net(images.to(device))
            loss += criterion(outputs, labels.to(device)).item()
            correct += (outputs.argmax(1) == labels.to(device)).sum().item()
    n = len(testloader.dataset)  # type: ignore[arg-type]
    return loss / n, correct / n
