"""The pack route: a dataset as trainbox packs it (``trainbox dataset pack``), one tar or shards
listed by an index (``shards``), streamed from the Hub and extracted safely (``archive``)."""
