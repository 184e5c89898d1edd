"""Domain operations: functions that take the session first, flush and never commit."""
