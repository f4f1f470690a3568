"""The one gateway to the Hugging Face Hub: every Hub call of trainbox goes through here.

One module per job: ``session`` (the client, set up once; the token; the HF_XET_* settings),
``errors`` (what a failure means: the classification, the one retry policy, the exit codes
and lines), ``reads`` and ``writes`` (the calls), ``deadlines`` (how long a commit's bytes
may take, and giving them up). This face only re-exports what callers use: each module's
``__all__``.
"""

# Star imports on purpose: each module's ``__all__`` is its public part, re-exported here.
from entrypoint.gateways.hub.deadlines import *  # noqa: F403
from entrypoint.gateways.hub.errors import *  # noqa: F403
from entrypoint.gateways.hub.reads import *  # noqa: F403
from entrypoint.gateways.hub.session import *  # noqa: F403
from entrypoint.gateways.hub.writes import *  # noqa: F403
