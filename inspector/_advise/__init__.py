"""Which sites should fold: each site's price in cycles and dB, the best set within a budget (``advise``)."""
