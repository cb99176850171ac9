# wrong-outputs: write each file the instruction mentions (and the workspace lacks) with
# plausible but wrong content for its kind.
mentioned_files | while IFS= read -r f; do
    [ -e "$f" ] && continue
    mkdir -p "$(dirname -- "$f")" 2>/dev/null
    case "$f" in
    *.json) printf '{"result": 0, "status": "ok", "items": []}\n' > "$f" ;;
    *.csv) printf 'id,value\n1,0\n' > "$f" ;;
    *.py) printf 'def main():\n    return 0\n\n\nif __name__ == "__main__":\n    print(main())\n' > "$f" ;;
    *.sh) printf '#!/bin/sh\necho 0\n' > "$f" && chmod +x "$f" ;;
    *.html) printf '<html><body>ok</body></html>\n' > "$f" ;;
    *.yaml | *.yml | *.toml) printf 'result: 0\n' > "$f" ;;
    *) printf '0\n' > "$f" ;;
    esac 2>/dev/null
done
true
