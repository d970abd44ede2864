"""Container images of the services, built offline (issue 17): a Docker
engine the project starts itself (engine.py), a Debian base image made with
debootstrap, and the service images on top of it (images.py, the
Dockerfiles in the folders beside). See docs/containers.md."""
