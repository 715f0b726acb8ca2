"""The quantized numbers: quantizations, the Arm flow to the TOSA INT reference model, comparisons,
attribution and bit widths, and the records they return."""
