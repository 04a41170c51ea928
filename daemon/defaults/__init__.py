"""Every operational default of the daemon, in one place: `from dreamcycle.daemon import
defaults` and `defaults.NAME` reach any of them, whichever module of this package holds it.

The modules group the defaults by role: the data directory and the index (storage), the
dream cycle (cycle), the zeitgeist (zeitgeist), pulses and their budget (pulses), a
memory's decay, confidence, sweep and journal (memory), recall and what it learns
(recall), the HTTP API and its clients (api), keys and what this peer trusts (trust), and
the daemon as a service (service); units holds the units they are written in. A default's
comment says why it has its value.

Protocol constants (epsilon, outcome pulse parameters) live in pulses/constants.py. A
default that a library module uses itself (the sweep's percentile, ranking weights, the
index's graph, the embedder's batch) is a named constant there, with its reason, and is
imported here rather than written twice.
"""

# Star imports on purpose: this package's one public face is every default of its modules,
# and naming each here again would be a second list to keep in step with them.
from dreamcycle.daemon.defaults.api import *  # noqa: F403
from dreamcycle.daemon.defaults.cycle import *  # noqa: F403
from dreamcycle.daemon.defaults.memory import *  # noqa: F403
from dreamcycle.daemon.defaults.pulses import *  # noqa: F403
from dreamcycle.daemon.defaults.recall import *  # noqa: F403
from dreamcycle.daemon.defaults.service import *  # noqa: F403
from dreamcycle.daemon.defaults.storage import *  # noqa: F403
from dreamcycle.daemon.defaults.trust import *  # noqa: F403
from dreamcycle.daemon.defaults.units import *  # noqa: F403
from dreamcycle.daemon.defaults.zeitgeist import *  # noqa: F403
