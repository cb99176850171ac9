#!/bin/bash
python3 -c '
import collections, json
words = open("/workspace/words.txt").read().split()
json.dump(collections.Counter(words), open("/workspace/report.json", "w"))
'
