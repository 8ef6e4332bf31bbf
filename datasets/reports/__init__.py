"""What a version holds, in words and pictures, from its fingerprints: `version_examples`
(a version's examples, local or streamed), `version_diff` (`imagesets diff`),
`dataset_card` (the card's statistics), `report_page` (the page's HTML, self-contained) and
`version_report` (what goes on the page: `imagesets report`, and each build's
`report.html`).

Beneath the build, which writes each version's card and page as it builds; above image
analysis. Never imports the build, the read path, publishing or a builder.
"""
