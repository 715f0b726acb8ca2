"""What a variant costs on an accelerator: the accelerators (one registry), Vela's estimate of a lowered program."""
