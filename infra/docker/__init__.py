"""Container images of the services, built offline (issue 17). See
docs/containers.md.

* engine.py: the Docker engine the project starts itself;
* images.py: the Debian base image (debootstrap) and the service images, from
  the Dockerfiles of analysis/, haproxy/, postgres/, samsa/, zookeeper/;
* push.py: the images the cloud runs, tagged per build and pushed to its
  registry (make push-images);
* containers.py: containers started with testcontainers (tests, benchmark);
* pipeline.py: the pipeline of a topology run as containers.
"""
