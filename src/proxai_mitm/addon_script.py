"""ProxAI for mitmproxy, from an installed package: ``mitmdump -s "$(proxai addon-path)"``.

mitmproxy loads this file as a script and takes its ``addons`` list (docs/configuration.md lists the
options). ``proxai run`` passes it for you.
"""

from proxai_mitm.addon import ProxAI

addons = [ProxAI()]  # the addons of make_addons(), behind one object (cheaper dispatch)
