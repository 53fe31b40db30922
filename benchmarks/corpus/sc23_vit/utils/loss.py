import torch


def l2_loss(pred, target):
    """Mean over the batch of the relative L2 error of each sample."""
    num_examples = pred.shape[0]
    diff_norms = torch.norm(pred.reshape(num_examples, -1) - target.reshape(num_examples, -1), 2, 1)
    y_norms = torch.norm(target.reshape(num_examples, -1), 2, 1)
    return torch.mean(diff_norms / y_norms)


@torch.jit.script
def l2_loss_opt(pred: torch.Tensor, target: torch.Tensor):
    """l2_loss, TorchScript-compiled (used with enable_jit)."""
    num_examples = pred.shape[0]
    diff_norms = torch.norm(pred.reshape(num_examples, -1) - target.reshape(num_examples, -1), 2, 1)
    y_norms = torch.norm(target.reshape(num_examples, -1), 2, 1)
    return torch.mean(diff_norms / y_norms)
