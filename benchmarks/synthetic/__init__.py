"""Synthetic benchmark: the paper's Section 5.1 and its appendix ablations."""
