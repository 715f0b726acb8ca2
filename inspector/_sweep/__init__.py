"""Sweeps: many models x rules x stages into one table, resumable, on local workers or Ray."""
