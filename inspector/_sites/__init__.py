"""Sites and why: candidate conv->mul sites in an FX graph, the stable reason codes, and the
independent explainer that says why each site is folded or skipped."""
