"""The clean-up jobs' progress bar over a real Spark job (compaction/progress.py)."""

from __future__ import annotations

import io

from loglake.compaction.progress import SparkProgress, bar


def test_bar_shape():
    assert bar(0, 4, width=8) == "[........] 0/4"
    assert bar(2, 4, width=8) == "[####....] 2/4"
    assert bar(4, 4, width=8) == "[########] 4/4"
    assert bar(0, 0, width=4) == "[....] 0/0"


def test_progress_lines_while_a_job_runs(spark):
    out = io.StringIO()
    with SparkProgress(spark.sparkContext, "job", out=out, interval=0.3):
        result = spark.sparkContext.parallelize(range(6), 6).map(
            lambda x: (__import__("time").sleep(0.4), x)[1]).collect()  # by value to workers
    assert result == list(range(6))
    lines = out.getvalue().splitlines()
    assert len(lines) >= 2, lines  # some while running, one at the end
    assert all(line.startswith("job [") and " tasks, " in line for line in lines)
    assert "] 6/6 tasks" in lines[-1]


def test_short_jobs_print_nothing(spark):
    out = io.StringIO()
    with SparkProgress(spark.sparkContext, "job", out=out, interval=5.0):
        spark.sparkContext.parallelize(range(2), 2).collect()
    assert out.getvalue() == ""


def test_the_job_group_is_restored(spark):
    context = spark.sparkContext
    assert context.getLocalProperty("spark.jobGroup.id") is None
    with SparkProgress(context, "job", out=io.StringIO()):
        assert context.getLocalProperty("spark.jobGroup.id") is not None
    assert context.getLocalProperty("spark.jobGroup.id") is None
