#!/bin/bash
sed -i 's/return max(x, min(lo, hi))/return max(lo, min(x, hi))/' /workspace/bounds.py
