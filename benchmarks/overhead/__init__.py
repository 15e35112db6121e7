"""Controller overhead: the cost of a ZoAQ step against a fixed-K step."""
