import logging

import yaml


class YParams():
    """Reads one named section of a YAML file; its keys become attributes (params.batch_size)
    and items (params['batch_size'])."""

    def __init__(self, yaml_filename, config_name, print_params=False):
        self._yaml_filename = yaml_filename
        self._config_name = config_name
        self.params = {}

        if print_params:
            print("------------------ Configuration ------------------")

        with open(yaml_filename) as _file:
            sections = yaml.safe_load(_file)
        if config_name not in sections:
            raise KeyError("no section %r in %s (sections: %s)"
                           % (config_name, yaml_filename, ", ".join(sections)))

        for key, val in sections[config_name].items():
            if print_params:
                print(key, val)
            if val == 'None':
                val = None
            self.params[key] = val
            self.__setattr__(key, val)

        if print_params:
            print("---------------------------------------------------")

    def __getitem__(self, key):
        return self.params[key]

    def __setitem__(self, key, val):
        self.params[key] = val
        self.__setattr__(key, val)

    def __contains__(self, key):
        return (key in self.params)

    def update_params(self, config):
        for key, val in config.items():
            self.params[key] = val
            self.__setattr__(key, val)

    def log(self):
        logging.info("------------------ Configuration ------------------")
        logging.info("Configuration file: " + str(self._yaml_filename))
        logging.info("Configuration name: " + str(self._config_name))
        for key, val in self.params.items():
            logging.info(str(key) + ' ' + str(val))
        logging.info("---------------------------------------------------")
