"""``[core] hostname_callable`` of the deployment (``deploy.sh``): a worker's or triggerer's own loopback
address (``DEPLOY_HOSTNAME``), so the metadata database's ``job.hostname`` tells the two triggerers on one
machine apart, as two machines' hostnames would, and their log servers stay reachable by that name."""

from __future__ import annotations

import os
import socket


def hostname() -> str:
    return os.environ.get("DEPLOY_HOSTNAME") or socket.getfqdn()
