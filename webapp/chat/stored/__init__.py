"""What the chat stores and how it is read: the tables, branches, history, spends, search."""
