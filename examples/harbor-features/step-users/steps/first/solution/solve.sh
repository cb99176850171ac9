#!/bin/bash
id -un > /workspace/first.txt
