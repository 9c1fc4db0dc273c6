"""ProxAI for mitmproxy: `mitmdump -s addon/proxai.py [--set proxai_target=...]`.

The addon lives in src/proxai_mitm/; this file only loads it (docs/configuration.md lists the options).
"""

import sys
from pathlib import Path

try:
    import proxai_mitm  # noqa: F401
except ImportError:  # running from a checkout without an installed package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from proxai_mitm.addon import ProxAI

addons = [ProxAI()]  # the addons of make_addons(), behind one object (cheaper dispatch)
