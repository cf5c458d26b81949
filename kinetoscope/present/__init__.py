"""The presentation floor: safe text, the table model, and the text/Markdown/TSV/CSV renderers of every report. Imports only the parser and the analysis."""
