"""The fleet goodput model: what share of paid GPU time becomes training, by Monte Carlo (`meridian goodput`).

`failures` (published failure rates), `costs` (the trainer's and the repair
paths' times, each with its source), `jobs` (the shipped fleet's largest jobs
and Warden's policy for them), `simulate` (one job over a period, pure),
`sweep` (seeds, checkpoint intervals, Young/Daly), `report` (text and JSON).
"""
