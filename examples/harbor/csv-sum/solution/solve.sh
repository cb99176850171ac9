#!/bin/bash
python3 -c '
import csv
with open("/workspace/sales.csv") as f:
    print(sum(int(r["amount"]) for r in csv.DictReader(f)))
' > /workspace/total.txt
