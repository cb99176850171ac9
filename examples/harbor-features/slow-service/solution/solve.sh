#!/bin/bash
# one call, no retry: the ledger is up before the agent starts
python3 -c "import os, urllib.request as r; open('/workspace/answer.txt', 'wb').write(r.urlopen(os.environ['LEDGER_URL'], timeout=10).read())"
