"""What every layer's long-running code needs and none of them owns: the clock, the
retry policy, background task helpers, and the start-up heap freeze.

The bottom of the house: ``runtime`` imports nothing of ours, and every package
(``storage``, ``channels``, ``scheduler``, ``agent``) may import it."""
