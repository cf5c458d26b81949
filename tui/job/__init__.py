"""The job viewer: ranks, collectives, the job timeline."""
