"""Writers: event writers, transactions, large events, and the segment writers under them."""
