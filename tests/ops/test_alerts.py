"""The alert rules of docs/alerts.yml, with Prometheus's own promtool: its unit tests
(tests/ops/alerts_test.yml), and "nobody is draining" on the series a real exporter writes for a
pool that no worker drains."""

import json
from pathlib import Path

from celery_redqueue import CappedPool
from celery_redqueue.ops.metrics import render
from celery_redqueue.ops.reading import Operations

from .promtool import promtool
from .test_metrics import samples

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docs" / "alerts.yml"


def test_the_rules_are_valid_and_pass_their_unit_tests():
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", str(ROOT / "tests" / "ops" / "alerts_test.yml"))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_nobody_draining_fires_on_what_the_exporter_writes_with_no_worker(
    app, redqueue_redis, redqueue_prefix, tmp_path
):
    pool = CappedPool(redqueue_redis, "orphaned", 100, prefix=redqueue_prefix)
    pool.add_many(range(5))
    text, _ = render(Operations.from_app(app))
    found = samples(text.decode())
    labels = frozenset({("kind", "pool"), ("name", "orphaned")})
    assert found["redqueue_oldest_age_seconds", labels] >= 0
    processed = found["redqueue_processed_total", labels]
    # Why the README's old rule (oldest_age > 300 and workers_needed > 0) never fired with every
    # worker dead: with nothing processed in the last minute there is no workers_needed series.
    assert ("redqueue_workers_needed", labels) not in found

    # The same label sets, ageing for 20 minutes with the processed count standing still.
    selector = "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels)) + "}"
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": "redqueue_oldest_age_seconds" + selector, "values": "0+60x30"},
                    {"series": "redqueue_processed_total" + selector, "values": f"{processed}x30"},
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "20m",
                        "alertname": "RedqueueNobodyDraining",
                        "exp_alerts": [
                            {
                                "exp_labels": {**dict(labels), "severity": "critical"},
                                "exp_annotations": {
                                    "summary": "pool orphaned: nothing processed for 10 minutes,"
                                    " oldest item waits 20m 0s"
                                },
                            }
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "nobody_draining_test.yml"
    path.write_text(json.dumps(test))  # JSON is YAML
    tested = promtool("test", "rules", str(path))
    assert tested.returncode == 0, tested.stdout + tested.stderr
