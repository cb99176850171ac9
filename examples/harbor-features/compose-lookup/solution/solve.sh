#!/bin/bash
python3 -c "import os, urllib.request as r; open('/workspace/answer.txt', 'wb').write(r.urlopen(os.environ['LOOKUP_URL'], timeout=10).read())"
