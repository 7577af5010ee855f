"""A cluster's replicas on this SPU: which partitions it leads or follows (`replicas`), the
leader's side (`leader`: follower progress, high watermark, in-sync set) and the follower's
(`follower`: truncation to the leader's epoch history, then copying), epoch histories
(`epochs`), replicated tables (`tables`), and the link to the controller (`agent`)."""
