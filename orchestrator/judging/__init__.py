"""The one judge of "slower than it should be" (judge.py) and the statistics under it (stats.py):
pure numpy, below every layer that gives verdicts (sweep's qualify, analysis's compare and report
flags, execution's watch), so each of them may import it."""
