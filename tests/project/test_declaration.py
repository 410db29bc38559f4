"""Options are checked where a task is declared, and every message names the option."""

import pytest

from celery_redqueue import BucketTask, ConfigurationError, PoolTask, bucket_task, pool_task
from celery_redqueue.tasks.lease import LeaseTask, lease_task


def body(x):
    pass


def test_a_typo_in_a_pool_option_is_refused_with_a_hint():
    with pytest.raises(ConfigurationError, match=r"pool_polcy .*did you mean pool_policy"):
        pool_task(pool_polcy="newest")


def test_a_typo_in_a_bucket_or_lease_option_is_refused_with_a_hint():
    with pytest.raises(ConfigurationError, match=r"bucket_rat\b.*did you mean bucket_rate"):
        bucket_task(bucket_key="x", bucket_rat="5/s")
    with pytest.raises(ConfigurationError, match=r"lease_tll .*did you mean lease_ttl"):
        lease_task(lease_tll=30)


def test_another_kinds_option_is_refused():
    with pytest.raises(ConfigurationError, match="bucket_rate is not an option of a pool task"):
        pool_task(bucket_rate="5/s")


def test_a_subclass_with_a_misspelt_option_is_refused():
    with pytest.raises(ConfigurationError, match=r"pool_sise .*did you mean pool_size"):
        type("Small", (PoolTask,), {"pool_sise": 3})


def test_app_task_with_base_checks_at_finalize(app):
    app.task(base=PoolTask, pool_polcy="newest")(body)
    with pytest.raises(ConfigurationError, match=r"pool_polcy .*did you mean pool_policy"):
        app.finalize()


def test_bucket_key_must_name_a_parameter():
    def fetch(url, domain):
        pass

    with pytest.raises(ConfigurationError, match=r"bucket_key='nope' is not a parameter.*url"):
        bucket_task(bucket_key="nope")(fetch)
    with pytest.raises(ConfigurationError, match=r"bucket_key='domian'.*did you mean domain"):
        bucket_task(bucket_key="domian")(fetch)


def test_bucket_key_checked_for_app_task_with_base(app):
    app.task(base=BucketTask, bucket_key="nope")(body)
    with pytest.raises(ConfigurationError, match="bucket_key='nope' is not a parameter"):
        app.finalize()


def test_bucket_key_of_a_bound_body_is_one_of_its_parameters(app):
    @bucket_task(app=app, bucket_key="tenant", bind=True)
    def work(self, tenant, n):
        pass

    assert work.key_for(("acme", 1), {}) == "acme"


@pytest.mark.parametrize(
    ("decorator", "option"),
    [(pool_task, "pool_name"), (lease_task, "lease_resources")],
)
def test_structure_names_are_checked_at_decoration(decorator, option):
    with pytest.raises(ConfigurationError, match=option):
        decorator(**{option: "a}b"})


def test_bucket_name_is_checked_at_decoration():
    with pytest.raises(ConfigurationError, match="bucket_name"):
        bucket_task(bucket_key="x", bucket_name="a{b")


def test_a_task_name_that_cannot_name_a_structure_is_refused():
    with pytest.raises(ConfigurationError, match=r"pool_name \(the task name"):
        pool_task(name="shop.{views}")(body)


def test_structure_name_checked_for_app_task_with_base(app):
    app.task(base=LeaseTask, lease_resources="a}b")(body)
    with pytest.raises(ConfigurationError, match="lease_resources"):
        app.finalize()


def test_a_misspelt_stream_option_is_refused_with_a_hint():
    from celery_redqueue.tasks.stream import StreamTask, stream_task

    with pytest.raises(
        ConfigurationError, match=r"stream_batchsize .*did you mean stream_batch_size"
    ):
        type("Orders", (StreamTask,), {"stream_batchsize": 5})
    with pytest.raises(
        ConfigurationError, match=r"stream_max_recieves .*did you mean stream_max_receives"
    ):
        stream_task(stream="orders", group="g", stream_max_recieves=3)(body)


@pytest.mark.parametrize(
    "option, hint",
    [
        ({"rate_limit": "10/s"}, "use a bucket task"),
        ({"serializer": "pickle"}, "redqueue_serializer"),
        ({"expires": 60}, "pool_policy"),
    ],
)
def test_celery_options_that_would_only_reach_the_drain_job_are_refused(celery_app, option, hint):
    # Celery would apply them to the argument-less drain job alone: the calls would go without.
    name = next(iter(option))
    with pytest.raises(ConfigurationError, match=rf"{name}=.*refused on a pool task.*{hint}"):
        celery_app.task(base=PoolTask, **option)(body).name  # noqa: B018  (makes its class)
    with pytest.raises(ConfigurationError, match=rf"{name}=.*refused on a pool task"):
        pool_task(**option)(body)

    class Subclassed(PoolTask):
        abstract = True

    with pytest.raises(ConfigurationError, match=rf"Limited: {name}="):
        type("Limited", (Subclassed,), {name: option[name], "pool_size": 5})


def test_a_bucket_task_with_celerys_rate_limit_is_told_of_bucket_rate():
    with pytest.raises(ConfigurationError, match=r"rate_limit=.*use bucket_rate="):
        bucket_task(bucket_key="x", bucket_rate="5/s", rate_limit="5/s")(body)
