"""URL slugs."""


def slugify(text):
    return text.replace(" ", "-")
