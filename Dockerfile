# One image per service, all from this file:
#   scripts/build.sh && docker build --build-arg SERVICE=scheduler -t switchyard/scheduler:dev .
# The binary is static (scripts/build.sh: CGO_ENABLED=0), so the image is just that file:
# no shell, no libc, nothing else to patch. Healthchecks exec `/service healthcheck`.
FROM scratch
ARG SERVICE
COPY dist/${SERVICE} /service
# nobody: the services need no privileges and bind ports above 1024.
USER 65534:65534
ENTRYPOINT ["/service"]
