
customer-42€øĞÓ»2ev-cc4e55909e902684"
askwhere is A1?