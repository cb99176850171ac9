# empty-files: create an empty file under each name the instruction mentions (and the
# workspace lacks).
mentioned_files | while IFS= read -r f; do
    [ -e "$f" ] && continue
    mkdir -p "$(dirname -- "$f")" 2>/dev/null
    : > "$f" 2>/dev/null
done
true
