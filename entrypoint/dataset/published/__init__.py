"""The as-published route: a dataset repo as people publish it (parquet, a YOLO or COCO folder,
an ImageFolder, a zip), fetched and converted into what LibreYOLO reads (``route``), through
its forms' readers (``parquet``, ``folders``) and writers (``layout``, ``boxes``, ``images``)."""
