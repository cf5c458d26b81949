"""What the viewers show, without Textual: the loader, the view data over a trace's session, what a failed result says."""
