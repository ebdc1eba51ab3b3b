"""Who a request comes from (``client_key``) and the per-client table of wrong tokens
(``AuthThrottle``): forged ``X-Forwarded-For`` hops are never the client, and the table
stays bounded however many addresses guess."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from ipaddress import ip_network

import pytest

from agent.app.access import AuthThrottle, client_key

PROXIES = [ip_network("10.0.0.0/8"), ip_network("::1")]
NOW = datetime(2026, 11, 26, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("peer", "forwarded", "expected"),
    [
        ("203.0.113.7", [], "203.0.113.7"),
        ("203.0.113.7", ["198.51.100.2"], "203.0.113.7"),  # not a proxy: header ignored
        ("10.0.0.5", ["198.51.100.2"], "198.51.100.2"),
        ("10.0.0.5", ["1.2.3.4, 198.51.100.2"], "198.51.100.2"),  # forged hop on the left
        ("10.0.0.5", ["1.2.3.4, 198.51.100.2, 10.0.0.9"], "198.51.100.2"),  # two proxies
        ("10.0.0.5", ["1.2.3.4", "198.51.100.2"], "198.51.100.2"),  # two header lines
        ("10.0.0.5", ["10.0.0.7, 10.0.0.9"], "10.0.0.7"),  # only proxies: the farthest
        ("10.0.0.5", [], "10.0.0.5"),
        ("10.0.0.5", ["198.51.100.2:4711"], "198.51.100.2"),
        ("10.0.0.5", ["[2001:db8:1:2::5]:443"], "2001:db8:1:2::/64"),
        ("::1", ["2001:db8:1:2:aaaa::1"], "2001:db8:1:2::/64"),  # an IPv6 client: its /64
        ("::ffff:10.0.0.5", ["198.51.100.2"], "198.51.100.2"),  # IPv4-mapped proxy
        ("10.0.0.5", ["evil, unknown"], "unknown"),  # the proxy's own word, not the client's
        (None, ["198.51.100.2"], "unknown"),
    ],
)
def test_the_client_is_the_rightmost_hop_no_trusted_proxy_wrote(
    peer: str | None, forwarded: list[str], expected: str
) -> None:
    assert client_key(peer, forwarded, PROXIES) == expected


def test_without_trusted_proxies_the_peer_is_the_client() -> None:
    assert client_key("10.0.0.5", ["198.51.100.2"], []) == "10.0.0.5"


def test_the_table_stays_bounded_and_forgets_the_oldest_first() -> None:
    throttle = AuthThrottle(failures=3, window=timedelta(minutes=1), max_clients=100)
    for i in range(5000):
        for _ in range(3):
            throttle.failed(f"client-{i}", NOW)
    assert len(throttle) == 100
    assert throttle.retry_after("client-4999", NOW) == 60
    assert throttle.retry_after("client-4900", NOW) == 60
    assert throttle.retry_after("client-4899", NOW) is None  # forgotten
    assert throttle.retry_after("client-0", NOW) is None


def test_failures_leave_the_window_one_by_one() -> None:
    throttle = AuthThrottle(failures=3, window=timedelta(minutes=1))
    for second in (0, 10, 20, 30):
        throttle.failed("a", NOW + timedelta(seconds=second))
    # The last three (10, 20, 30 s) hold "a" until the first of them is a minute old.
    assert throttle.retry_after("a", NOW + timedelta(seconds=30)) == 40
    assert throttle.retry_after("a", NOW + timedelta(seconds=70)) is None
    assert throttle.retry_after("b", NOW) is None
    assert len(throttle) == 1
    assert throttle.retry_after("a", NOW + timedelta(seconds=91)) is None
    assert len(throttle) == 0  # expired entries are dropped when looked at
