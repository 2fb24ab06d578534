# Containerized testbed: engine bootstrap, images, the default compose experiment.
.PHONY: docker-engine images up

docker-engine: ## install and start what containers need: engine (198.18.0.0/15 only), compose v2, debootstrap (root)
	scripts/docker-bootstrap.sh

images: $(STAMP) ## build base + controller/client/worker images (debootstrap base when no registry answers)
	$(PYTHON) -m commlab.testbed.images

up: docker-engine images ## run the default experiment in containers: FL int8_sparse, 2 clients, 10mbit (docker compose up)
	docker compose up --abort-on-container-failure
