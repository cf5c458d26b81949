"""The ground floor of kinetoscope's own code: typed option values and budgets. Imports nothing of kinetoscope."""
