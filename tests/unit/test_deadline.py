"""The total deadline of one blocking call (api/deadline.py): requests' own, with a real loopback server
that trickles its reply one byte at a time (each read is quick, the whole reply would take minutes)."""

from __future__ import annotations

import pytest
import requests

from airflow_provider_slurmapi.api.deadline import Deadline, DeadlineAdapter
from tests import hostile_http as hostile
from tests.hostile_http import LoopbackServer


def session() -> requests.Session:
    made = requests.Session()
    made.mount("http://", DeadlineAdapter())
    return made


@pytest.mark.parametrize("head_too", [True, False], ids=["whole-reply", "body"])
def test_a_trickled_reply_is_cut_at_the_deadline_and_says_so(head_too):
    with LoopbackServer(hostile.trickle(head_too=head_too)) as server, session() as http:
        with pytest.raises(requests.RequestException), Deadline(0.5) as deadline:
            http.get(server.url, timeout=5).content  # noqa: B018  (reading the body is the point)
        assert deadline.expired  # the error the cut caused reads as a timeout
        assert server.sent < len(hostile.OK_BODY) * 20  # cut long before the reply was whole


def test_a_reply_within_the_deadline_is_untouched_and_the_timer_stops():
    with LoopbackServer(hostile.reply()) as server, session() as http:
        with Deadline(30) as deadline:
            assert http.get(server.url, timeout=5).content == hostile.OK_BODY
        assert not deadline.expired
    deadline._timer.join(5)  # cancelled: ends at once, not after its 30 s
    assert not deadline._timer.is_alive()


def test_without_a_running_deadline_the_adapter_is_a_plain_one():
    with LoopbackServer(hostile.reply()) as server, session() as http:
        assert http.get(server.url, timeout=5).status_code == 200
