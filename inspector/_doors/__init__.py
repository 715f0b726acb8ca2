"""The only doors to ExecuTorch, torchao and the TOSA reference model: every private name they need is
checked once, with a one-line error naming the installed version when one is missing."""
