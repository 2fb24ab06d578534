"""Network links: named link profiles applied with tc (`profiles`) and the network namespaces that
carry shaped links on one machine (`netns`)."""
