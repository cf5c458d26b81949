"""The export engine: windows and steps of a trace, the crop, a job's bundle. Imports only the floors below it."""
