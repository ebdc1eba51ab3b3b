"""Cron jobs: the expression (``expression``), the job as a value and its rules
(``job``), and ``CronService``, through which every job is written (``service``)."""
